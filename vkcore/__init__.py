"""vkcore: the Vulkan side of vkcap.

Scenario model and validation, formats, resources, shaders and pipelines, descriptors, barriers
and the frame executor. This is the only package that imports ``vulkan``; it knows nothing of traces.
"""
