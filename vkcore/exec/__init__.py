"""Execution: the session that holds a plan's Vulkan objects, the frame executor, the runner, outputs and reports."""
