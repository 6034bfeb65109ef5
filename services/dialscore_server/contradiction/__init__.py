"""DECODE contradiction detection: the Ray-free engine (`engine`), the HTTP schemas of
POST /v1/contradiction (`protocol`) and the DECODE data reader and metrics (`decode`)."""
