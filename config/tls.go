package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// The TLS files the config names are read here, by validation (so a bad
// file is a config error naming its key, exit 2 at start, a rejected
// reload later) and by the listeners and upstream clients that use them
// (cmd/pdlb/service, proxy), so both judge a file alike.

// LoadKeyPair reads a PEM certificate chain and its private key. Errors
// name the key (certKey or keyKey) whose file is at fault.
func LoadKeyPair(certKey, certFile, keyKey, keyFile string) (tls.Certificate, error) {
	pair, err := loadKeyPair(certKey, certFile, keyKey, keyFile)
	if err != nil {
		return pair, err
	}
	return pair, nil
}

func loadKeyPair(certKey, certFile, keyKey, keyFile string) (tls.Certificate, *Error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, errorf(certKey, err.Error())
	}
	if _, err := firstCertificate(certPEM); err != nil {
		return tls.Certificate{}, errorf(certKey, certFile+": "+err.Error())
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, errorf(keyKey, err.Error())
	}
	// The certificate parsed above, what fails here is the key: unreadable
	// as a key, or not the one of the certificate's public key.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, errorf(keyKey, fmt.Sprintf("%s is not the key of %s %s: %v", keyFile, certKey, certFile, err))
	}
	return pair, nil
}

// LoadCAPool reads a file of PEM CA certificates; one that holds none is
// an error, not an empty pool that would refuse every peer.
func LoadCAPool(key, file string) (*x509.CertPool, error) {
	pool, err := loadCAPool(key, file)
	if err != nil {
		return nil, err
	}
	return pool, nil
}

func loadCAPool(key, file string) (*x509.CertPool, *Error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, errorf(key, err.Error())
	}
	if _, err := firstCertificate(data); err != nil {
		return nil, errorf(key, file+": "+err.Error())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errorf(key, file+": no PEM certificate could be parsed")
	}
	return pool, nil
}

// firstCertificate parses the first CERTIFICATE block of PEM data, so a
// key file given as the certificate, or DER, is called what it is.
func firstCertificate(data []byte) (*x509.Certificate, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("no PEM CERTIFICATE block")
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("bad certificate: %v", err)
			}
			return cert, nil
		}
	}
}
