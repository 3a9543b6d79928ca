"""Resource definitions (template.yaml) and the local stack on an embedded moto."""
