"""The server and the clients on Ray: the coordinator's actor, the client actors and their pool, starting Ray and placing the actors, tensors on the wire, clusters and jobs."""
