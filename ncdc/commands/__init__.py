"""The ncdc subcommands, one module each (``ncdc.cli`` lists them); each module imports only
what building its parser needs, so ``ncdc --help`` stays cheap."""
