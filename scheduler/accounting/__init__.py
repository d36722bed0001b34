"""Where the money went: the ledger of billed time, the monthly report and its renderers."""
