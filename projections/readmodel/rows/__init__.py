"""What the read models look like, as plain data: the tables (``tables``), each stage's entity as rows
(``entities``, what the writer writes), and the typed rows the reader answers with (``typed``, made from
database records by ``from_records``). Pure: no I/O; the writer and the reader beside this package are
the only modules of the read model that talk to PostgreSQL."""
