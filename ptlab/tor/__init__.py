"""A private Tor network in the lab: keys, torrcs, processes, bootstrap.

Written from tor's manual (tor(1), "TESTING NETWORK OPTIONS") and its specs:
``keys`` makes the directory authorities' keys (tor-gencert) and reads every
node's fingerprint (``tor --list-fingerprint``); ``torrc`` renders each
node's configuration; ``network`` starts the authorities and relays on the
internet side of the lab, and bridges and clients where a transport needs
them, and waits for ``Bootstrapped 100%``. Everything tor writes lives in
the lab's directory and goes with it.
"""
