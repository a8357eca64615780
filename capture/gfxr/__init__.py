"""Import of GFXReconstruct captures (``.gfxr``): the compute work an application did becomes a vkcap
scenario. Reading only: no device work here (the scenario runs through vkcore like any other).

- :mod:`.blocks`: the capture's binary blocks (header, compression, fill-memory commands, call parameters);
- :mod:`.reader`: every Vulkan call as ``gfxrecon-convert`` prints it, joined with the bytes it leaves out;
- :mod:`.model`: the compute state machine replaying those calls on the host;
- :mod:`.unsupported`: what cannot be imported, one line per kind;
- :mod:`.to_scenario`: the scenario folder written from the model.
"""
