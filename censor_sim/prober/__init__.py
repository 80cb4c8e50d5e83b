"""The censor's active prober: probe suites, observation of a server's reaction, verdicts.

Modelled on Frolov, Wampler and Wustrow, NDSS 2020, "Detecting Probe-resistant
Proxies" (see ``docs/censors/probing.md`` §3 and §4). Like the rest of
``censor_sim`` it works on bytes and sockets only and never imports ``transports``:
a prober that reused a transport's code would know secrets a real censor lacks.
"""
