"""Shaders and pipelines: GLSL compilation, SPIR-V reflection, layouts the shaders agree with, compute and graphics pipelines and their cache."""
