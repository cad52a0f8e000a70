"""The `buraco` command: mint tokens, call the services by hand, play or watch a table in the
terminal. The table connection and model it plays through are `services.client`'s; this package
keeps the terminal's own parts (the commands, the rendering, the command loop)."""
