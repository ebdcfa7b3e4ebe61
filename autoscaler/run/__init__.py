"""The drivers: the daemon, the emulator, machines, agents, the dispatcher, run directories."""
