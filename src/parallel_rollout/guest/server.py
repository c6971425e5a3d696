"""The guest agent's script: ``python3 server.py --unix PATH`` starts the agent of
``agent_server.py`` (its routes, options and start-up; ``--help`` lists the options).

Python compiles the script it runs at every start and keeps bytecode only of the modules it
imports: the agent's ~300 lines as the script were ~5 ms of compiling at every ``process`` VM
reset, so the script is these few lines.
"""

import os
import sys

if __package__:
    from .agent_server import main
else:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)  # -I leaves the script's folder off sys.path
    from agent_server import main  # type: ignore[no-redef]

if __name__ == "__main__":
    sys.exit(main())
