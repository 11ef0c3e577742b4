"""Helpers with no domain knowledge: durable and private files, setting readers, YAML lines."""
