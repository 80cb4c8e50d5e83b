"""One experiment across three machines (issue 11): client, censor router, servers.

``ptlab vm up|run|down`` drives the Vagrant VMs of the top-level Vagrantfile;
``ptlab vm run --split`` runs the very same command lists in three network
namespaces laid out like the VMs, which is how CI tests the VM path.
"""
