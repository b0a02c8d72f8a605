"""How envelopes travel from agents to the pipeline: the transport interface with its in-process
implementation (transport.base) and Apache Kafka (transport.kafka)."""
