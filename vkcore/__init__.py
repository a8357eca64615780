"""vkcore: the Vulkan side of vkcap, in layers (each uses only those listed before it):

- ``scenario``: the scenario's model, validation and frames (no Vulkan);
- ``device``: the instance, device and queue, ARM's emulation layers, validation, memory, barriers, FFI;
- ``resources``: buffers, images and tensors on the device, their files, formats and staging;
- ``shaders``: GLSL compilation, SPIR-V reflection, pipeline layouts, pipelines and their cache;
- ``graphs``: VGF files, data graph pipelines and sessions, graph dispatches, optical flow;
- ``commands``: one module per kind of scenario command;
- ``exec``: the session, the frame executor, the runner, outputs and reports.

This is the only package that imports ``vulkan``; it knows nothing of traces.
"""
