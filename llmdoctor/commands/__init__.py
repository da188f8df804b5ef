"""The command line's commands, one module per command (`llmdoctor/cli.py` adds them to the group), and
`options.py`: the options several commands share. A command module parses and reports; the work is in run/,
reporting/, repair/ and incident_bundle/."""
