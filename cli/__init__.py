"""The `offsetstore` command: the server's subcommands and the kafka-consumer-groups-style `groups`."""
