import sys

try:
    # The handlers first, before anything else loads: from here on an interrupt is one
    # line and 130 (143 for SIGTERM), and while nothing is made yet it ends the process at
    # once rather than being raised into an import that might lose it (torch's).
    from .errors import install_signal_handlers
    install_signal_handlers(exit_at_once=True)
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C before the handlers were in place: one line, as later
    print("reporter: interrupted; nothing half-written was kept", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
