-- A tenant's secrets, each sealed (nonce, ciphertext and tag of
-- ChaCha20-Poly1305 under a key derived for the tenant; the tenant and
-- the name are its associated data) before it reaches the store.
CREATE TABLE IF NOT EXISTS secrets (
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    name        TEXT NOT NULL,
    sealed      BLOB NOT NULL,
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);
