"""Cluster providers, OS setup and DB automation (issue 3).

- :mod:`chaos.control.node`: :class:`Node`, the shape every provider yields.
- :mod:`chaos.cluster.image`: the cached Debian bookworm node image (debootstrap + ``docker import``).
- :mod:`chaos.cluster.docker`: ``DockerProvider`` (n1..nN containers with sshd on a private network).
- :mod:`chaos.cluster.sshhosts`: ``SSHHosts`` (existing hosts).
- :mod:`chaos.cluster.osetup`: ``DebianOS`` (the tool's and the DB's packages, network and tc baseline).
- :mod:`chaos.cluster.providers`: choosing the nodes (docker or ssh) for every command.
- :mod:`chaos.cluster.cli`: ``chaos cluster up|status|down|image|exec``.

The SSH control layer is :mod:`chaos.control.ssh`; the DB contract, Jepsen's DB protocol (a DB is a
plug-in, :mod:`chaos.plugins`), is :mod:`chaos.control.db`, in the kit beside the ``Test``.
"""
