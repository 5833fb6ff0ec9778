"""A plug-in DB whose client raises on every op (issue 34): its own bug, not the database's.

The run must end unknown (exit 2), its summary naming the exception and this file's line, never
invalid and never "unavailable"."""

from chaos.api import Node


class Broken:
    def __init__(self, nodes, node):
        self.nodes, self.node = nodes, node

    def _host(self):
        for n in self.nodes:
            if n == self.node.name:  # the bug: compares a name with a Node
                return n
        raise ValueError(f"unknown node {self.node!r}")

    def read(self, key):
        return self._host()

    def write(self, key, value):
        return self._host()

    def cas(self, key, expected, new):
        return self._host()

    def delete(self, key):
        return self._host()

    def close(self):
        pass


class CrashingDB:
    name = "crashing"
    client_protocols = ("register",)

    def setup(self, control):
        pass

    def teardown(self, control):
        pass

    def describe(self):
        return "a client that raises on every op"

    def open_client(self, protocol, test, node: Node, process):
        return Broken(list(test.nodes), node)
