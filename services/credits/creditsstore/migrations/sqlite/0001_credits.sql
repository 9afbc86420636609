-- One row per wallet: its balance, kept equal to the sum of its ledger
-- entries. Every change updates it with a conditional UPDATE in the same
-- transaction as the ledger insert, so concurrent spends cannot overdraw it.
CREATE TABLE credit_wallets (
    wallet    TEXT PRIMARY KEY,
    balance   INTEGER NOT NULL CHECK (balance >= 0),
    update_ms INTEGER NOT NULL
);

-- Every change to a wallet. amount is signed: positive grants, negative spends.
CREATE TABLE credit_ledger (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    wallet        TEXT NOT NULL,
    kind          INTEGER NOT NULL,
    amount        INTEGER NOT NULL CHECK (amount <> 0),
    balance_after INTEGER NOT NULL CHECK (balance_after >= 0),
    reference     TEXT NOT NULL,
    note          TEXT NOT NULL DEFAULT '',
    actor         TEXT NOT NULL,
    create_ms     INTEGER NOT NULL
);
CREATE INDEX credit_ledger_wallet ON credit_ledger (wallet, seq DESC);
-- A grant reference is applied once, whatever the wallet; a spend reference
-- once per wallet.
CREATE UNIQUE INDEX credit_ledger_grant_reference ON credit_ledger (reference) WHERE kind = 1;
CREATE UNIQUE INDEX credit_ledger_spend_reference ON credit_ledger (wallet, reference) WHERE kind = 2;

-- Settings that were set; the others have their defaults.
CREATE TABLE credit_config (
    config_key TEXT PRIMARY KEY,
    value      INTEGER NOT NULL,
    update_ms  INTEGER NOT NULL,
    updated_by TEXT NOT NULL
);
