"""The checks each kind of resource and command owns, one module per kind (or per family sharing checks),
named by the kind's model class (``CHECKS``) and run by :mod:`vkcore.scenario.validate` in the phases of
:mod:`vkcore.scenario.checking`. Each module's ``CHECKS`` maps a phase to a check. No module here imports
Vulkan: validation runs before any device exists, and at start-up."""
