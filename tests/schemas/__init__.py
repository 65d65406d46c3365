"""Schema transforms: Row, Select, GroupBy (oracle pairs against apache_beam)."""
