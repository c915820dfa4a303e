"""The analysing room: reads result folders and derives figures. Never imports the
measuring room or the transports."""
