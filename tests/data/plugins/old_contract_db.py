"""A plug-in DB written against the previous, unversioned contract (2026-11-23), kept unchanged as
a fixture (issue 34): it imports the client errors from ``chaos.workloads.clients`` (moved to
``chaos.control.client`` since) and looks up ``open_client``'s node argument, then a name, with
``test.control.node(node)`` (the argument is a ``Node`` since). It must keep running, with one
deprecation line in the run summary. Its register is kept in the control process under one lock,
so it is linearizable by construction and needs nothing on the nodes."""

import threading

from chaos.workloads.clients import NotSent


class Registers:
    def __init__(self, lock, values, host):
        self.lock, self.values, self.host = lock, values, host

    def read(self, key):
        with self.lock:
            return self.values.get(key)

    def write(self, key, value):
        with self.lock:
            self.values[key] = value

    def cas(self, key, expected, new):
        with self.lock:
            if self.values.get(key) != expected:
                return False
            self.values[key] = new
            return True

    def close(self):
        pass


class OldContractDB:
    """name, setup, teardown, describe and clients, as plug-ins were written before API 1.0."""

    name = "old-contract"
    client_protocols = ("register",)

    def __init__(self):
        self.lock, self.values = threading.Lock(), {}

    def setup(self, control):
        pass

    def teardown(self, control):
        pass

    def describe(self):
        return "in-process registers, previous contract"

    def open_client(self, protocol, test, node, process):
        if protocol != "register":
            raise NotSent(f"no {protocol} client")
        host = test.control.node(node).host  # node was the node's name then
        return Registers(self.lock, self.values, host)
