"""How an event travels, pure: ``envelope`` (the CloudEvents envelope around a catalogue event) and
``codec`` (its Kafka binary binding: headers and a JSON body, upcast and validated on the way in).
Called by the log adapters' users: every host and tool that writes or reads records."""
