"""``vkcap fleet resources``: the Ray custom resources a node advertises for ``vkcap suite run --ray``
(see :mod:`replay.fleet`), as the JSON ``ray start --resources`` takes."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable


def register(sub: Any, add_common: Callable[[argparse.ArgumentParser], None]) -> None:
    fleet = sub.add_parser("fleet", help="run suites on a Ray cluster of GPU machines (see suite run --ray)")
    actions = fleet.add_subparsers(dest="fleet_command", required=True)
    resources = actions.add_parser(
        "resources", help="print the custom resources this node advertises: ray start --resources \"$(vkcap fleet resources)\"")
    resources.add_argument("--name", metavar="NAME",
                           help="the node's name in results and errors (vkcap_node:NAME; default: its hostname)")
    add_common(resources)
    resources.set_defaults(handler=cmd_fleet_resources)


def cmd_fleet_resources(args: argparse.Namespace) -> int:
    """One line of JSON: ``vulkan_device:<name>`` and ``vulkan_driver:<version>`` counts of this
    machine's Vulkan devices, and ``vkcap_node:<name>`` with ``--name``."""
    # lazy: per command; vkcap --help imports this module, not replay.fleet_node, vkcore.device.context (with vulkan)
    from replay.fleet_node import node_resources
    from vkcore.device.context import list_devices

    print(json.dumps(node_resources(list_devices(), args.name), sort_keys=True))
    return 0
