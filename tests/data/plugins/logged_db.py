"""A plug-in DB that declares log files but no log patterns (issue 34): one file every node has
(``/etc/hostname``) and one no node has. The first must be downloaded into the run although no
pattern is declared; the second must be reported missing, never kept as an empty file."""

import threading

from chaos.api import NotSent

API = ">=1.0,<2"
PRESENT, ABSENT = "/etc/hostname", "/var/log/chaos-no-such-daemon.log"


class Registers:
    def __init__(self, lock, values):
        self.lock, self.values = lock, values

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


class LoggedDB:
    name = "logged"
    client_protocols = ("register",)

    def __init__(self):
        self.lock, self.values = threading.Lock(), {}

    def setup(self, control):
        pass

    def teardown(self, control):
        pass

    def describe(self):
        return "in-process registers, two declared logs, no patterns"

    def log_files(self, remote):
        return [PRESENT, ABSENT]

    def open_client(self, protocol, test, node, process):
        if protocol != "register":
            raise NotSent(f"no {protocol} client")
        return Registers(self.lock, self.values)
