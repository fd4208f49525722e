//! The `dynosim` command line, as a library so the Python package runs the very same parser.
