"""The scenario: its model, its validation (the JSON Schema and the checks it cannot express) and its frames. No Vulkan."""
