"""The names configs and the help screens check against, in a module without torch.

`posenc --help`, `posenc encodings` and every one-line config error import this, not the
encoding classes, so they answer before torch would have finished loading.
"""

#: Keys of an encoding's YAML that describe it rather than parameterise it. ``checks`` and
#: ``rotary`` are in the configs of runs saved before an encoding's constructor held its rules
#: and the class said whether it rotates: read from such a run, they are ignored.
META_KEYS = frozenset({"_target_", "name", "description", "paper", "checks", "rotary"})
#: eval.rope_scaling values; "none" evaluates the trained frequencies as they are.
ROPE_SCALING_METHODS = ("none", "pi", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope")
