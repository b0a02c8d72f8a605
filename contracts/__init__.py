"""What producers and consumers share: the message schema and envelope, every catalogued name, the
configuration model and the Prometheus exposition of catalogued series. Imports nothing else of goodput."""
