"""Everything that touches Ray: the actors, the client pool, starting and placing, tensors on the wire, clusters and jobs."""
