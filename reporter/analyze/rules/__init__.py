"""The built-in rules, one module per family. Each rule is a pure function of a Profile and
its limits, registered with its whole story (reporter.analyze.findings.Rule): its saving
model, what it explains, when it is only a symptom, the replacement the runner can time
for it, and the sentences its report chooses between (``says``).

Importing this package registers every rule. A new rule is a function in the family it
belongs to (or a new module imported below) and its words in each language
(templates/<lang>/findings/<id>.md.j2): docs/adding-a-rule.md."""

from . import copies, distributed, host, memory, operators, precision, waits  # noqa: F401
# registered after the others: a rule's order is its place in reports and what-ifs
from . import convolutions, gradients, process  # noqa: F401,E402
