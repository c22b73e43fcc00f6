"""Side-by-side benchmarks of lightning-fed against other federated-learning frameworks (peers).

A package so that Ray workers can import the Flower benchmark's client functions by name
(``benchmarks.peers.flower_fedavg``) instead of receiving pickled copies of ``__main__``.
"""
