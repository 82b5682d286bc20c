"""Names of the trailing metadata the API adds to an error, for clients without the rich error model.

Called by ``services.api.errors`` (which writes them) and ``services.api.client`` (which reads them);
kept apart so a client need not import the event catalogue.
"""

FIELD_HEADER = "fedsched-field"
REASON_HEADER = "fedsched-reason"
