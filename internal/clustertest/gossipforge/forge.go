// Package gossipforge builds the gossip datagrams an attacker who holds
// the shared gossip key (and nothing else) can send: memberlist v0.5.4's
// own wire format, encrypted with the key. Tests use it to check that such
// a holder cannot change membership or the replicated state (SPEC §5
// "Identity"); nothing in the shipped binaries imports it.
//
// The layout follows memberlist's net.go, util.go and security.go: a UDP
// packet is, without a label, the encryption version byte (1: AES-GCM, no
// padding), a 12-byte nonce and the sealed message, whose first byte is
// the message type and the rest the message msgpack-encoded with
// hashicorp/go-msgpack (memberlist's codec).
package gossipforge

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// memberlist's message types (net.go: "ONLY APPEND TO THIS LIST").
const (
	msgSuspect = 3
	msgAlive   = 4
	msgDead    = 5
)

// Vsn is what a memberlist v0.5.4 node with the default configuration
// advertises: protocol versions min 1, max 5, current 2; delegate 0.
var Vsn = []uint8{1, 5, 2, 0, 0, 0}

// Alive is memberlist's alive message: a claim that Node is alive at
// Addr:Port with this metadata and incarnation. Field names are the wire
// names.
type Alive struct {
	Incarnation uint32
	Node        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Vsn         []uint8
}

// Dead is memberlist's dead message (From == Node: the node left).
type Dead struct {
	Incarnation uint32
	Node        string
	From        string
}

// Suspect is memberlist's suspect message.
type Suspect struct {
	Incarnation uint32
	Node        string
	From        string
}

// AlivePacket is an encrypted UDP datagram carrying a.
func AlivePacket(secret []byte, a Alive) ([]byte, error) { return packet(secret, msgAlive, a) }

// DeadPacket is an encrypted UDP datagram carrying d.
func DeadPacket(secret []byte, d Dead) ([]byte, error) { return packet(secret, msgDead, d) }

// SuspectPacket is an encrypted UDP datagram carrying s.
func SuspectPacket(secret []byte, s Suspect) ([]byte, error) { return packet(secret, msgSuspect, s) }

func packet(secret []byte, typ byte, msg any) ([]byte, error) {
	var plain bytes.Buffer
	plain.WriteByte(typ)
	if err := codec.NewEncoder(&plain, &codec.MsgpackHandle{}).Encode(msg); err != nil {
		return nil, fmt.Errorf("gossipforge: encoding: %w", err)
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, fmt.Errorf("gossipforge: gossip key: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+gcm.NonceSize(), 1+gcm.NonceSize()+plain.Len()+gcm.Overhead())
	out[0] = 1 // encryption version 1: AES-GCM without padding
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return gcm.Seal(out, out[1:], plain.Bytes(), nil), nil // no label: no additional data
}

// Send writes pkt as one UDP datagram to addr (host:port, a gossip port).
func Send(addr string, pkt []byte) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write(pkt)
	return err
}

// LegacyMeta is node metadata in the earlier release's unsigned format
// (version 1, laid out byte by byte from its documentation, not with the
// membership package): a voter with pub, Δ and meshAddr, bootstrapped,
// eligible, claiming Retired and a FAILED clock — what the adversarial
// trial's forged alive carried.
func LegacyMeta(pub []byte, deltaMs uint16, meshAddr string) []byte {
	b := []byte{1, 1<<0 | 1<<1 | 1<<2} // version 1; eligible, retired, data dir ok
	b = append(b, pub...)
	b = binary.BigEndian.AppendUint16(b, deltaMs)
	b = append(b, 2, 3) // protocol 2, clock FAILED
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint64(b, uint64(time.Now().UnixMilli()))
	b = append(b, 1, 2, 3) // role voter, bootstrapped, bootstrap_expect 3
	b = binary.BigEndian.AppendUint32(b, 0)
	b = append(b, byte(len(meshAddr)))
	b = append(b, meshAddr...)
	return append(b, 0, 0) // no failure domain, no version
}
