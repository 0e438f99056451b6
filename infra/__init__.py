"""The Pulumi program: typed settings, components, and the offline renderer."""
