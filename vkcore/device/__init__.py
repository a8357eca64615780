"""The Vulkan device: instance, device and queue, ARM's emulation layers, the validation layer, memory, barriers, and the FFI of the ARM extensions."""
