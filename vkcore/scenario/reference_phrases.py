"""The reference runner's words for the bad inputs it also refuses, so that a script grepping its log finds them.

vkcap's one-line error keeps its own JSON path and detail; where ARM's ``scenario-runner`` (0.11) refuses the
same input, the line also holds the reference's key phrase, word for word (case included), as listed here.
``tests/test_reference_parity.py`` checks each phrase against the reference binary and against vkcap.
"""
from __future__ import annotations

#: A field whose value is not one of the allowed ones -> the reference's phrase, keyed by the field's name.
UNKNOWN_VALUE: dict[str, str] = {
    "shader_access": "Unknown shader_access value",
    "tiling": "Unknown tiling value",
    "stage": "Unknown shader stage value",
    "descriptor_type": "Unknown descriptor_type value",
    "min_filter": "Unknown min_filter value",
    "mag_filter": "Unknown mag_filter value",
    "mip_filter": "Unknown mip_filter value",
    "border_color": "Unknown border_color value",
    "old_layout": "Unknown old_layout value",
    "new_layout": "Unknown new_layout value",
    "format": "Unknown VkFormat",
}

#: A reference to no resource, by the kinds the reference expects there.
NOT_FOUND: dict[tuple[str, ...], str] = {
    ("shader",): "Shader resource not found",
    ("buffer", "image", "tensor"): "Memory resource not found",
}

#: An input file that cannot be opened: a GLSL shader's, any other.
CANNOT_OPEN_GLSL = "Cannot open GLSL shader file"
CANNOT_OPEN = "Could not open file"

NOT_UNIQUE_UID = "Not unique uid"
SIZE_MISMATCH = "size mismatch"
NO_MIPS = "Number of mips cannot be 0"
LOD_BEYOND_MIPS = "Requested level of details for the Image is greater than configured mipmaps"
ALIAS_TILING = "Aliased resources must have identical tiling"
ALIAS_MIPPED = "A mipped image cannot be aliased"
ALIAS_INNERMOST = "Aliased tensor innermost dimension"
