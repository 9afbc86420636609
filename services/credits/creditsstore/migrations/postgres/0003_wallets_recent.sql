-- credits_wallets lists the most recently changed wallets first.
CREATE INDEX credit_wallets_recent ON credit_wallets (update_ms DESC, wallet);
