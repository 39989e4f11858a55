// Package valkey is the Valkey/Redis backend of lease, built on valkey-go.
package valkey
