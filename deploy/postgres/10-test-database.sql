-- Runs once, when the compose stack's PostgreSQL volume is first initialised
-- (docker-entrypoint-initdb.d). POSTGRES_DB creates "mailsvc" (the service's database);
-- "test" is the database the Go tests use (internal/store/storetest, one schema per test).
CREATE DATABASE test;
