"""The clients' side of a round: the typed calls, a host of logical clients, the engines that train them, their data and states, the partial sums they send."""
