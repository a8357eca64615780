"""vkcap: the command line. Parses arguments and wires vkcore, capture and replay together."""

__version__ = "0.1.0"
