"""Online mode switches between classic and diskless (`diskless.enable`).

- `switch`: each leader brings its partitions to their topic's mode and records the
  committed switch in the partition states (`ModeSwitcher`).
- `status`: where a switch stands, per partition, from the cluster view (describe,
  DescribeConfigs' `diskless.mode.status`, the admin API).

What a mode *is* stays in broker/topic_mode.py: topics.py needs it and this package needs
topics.py, so moving it here would tie the two packages in a cycle. The mode markers in the
log are broker/log/modes.py. See docs/architecture.md ("Mode switches").
"""
