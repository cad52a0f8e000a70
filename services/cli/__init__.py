"""The `buraco` command: mint tokens and call the services by hand (more commands join later:
`buraco play` and `buraco watch` come with the game-session service)."""
