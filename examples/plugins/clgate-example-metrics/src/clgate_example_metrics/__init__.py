"""Example clgate plug-ins: ``cost_weighted_acc`` (a metric) and ``class_group_mean`` (a rule kind)."""
