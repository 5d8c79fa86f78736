import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while reporter itself loads: one line, as later
    print("reporter: interrupted; nothing half-written was kept", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
