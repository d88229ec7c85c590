package config

// checkListenerTLS checks a listener's TLS keys (prefix "server.tls" or
// "admin.tls"): both files or neither, a CA file only with them, and every
// file readable and fitting. The files are read, so a reload that names a
// bad pair is rejected and the running one stays.
func checkListenerTLS(prefix string, t ListenerTLS) *Error {
	if t.CertFile == "" && t.KeyFile == "" {
		if t.ClientCAFile != "" {
			return errorf(prefix+".client_ca_file", "needs "+prefix+".cert_file and key_file (mTLS is TLS first)")
		}
		return nil
	}
	if err := checkPair(prefix, t.CertFile, t.KeyFile); err != nil {
		return err
	}
	if t.ClientCAFile != "" {
		if _, err := loadCAPool(prefix+".client_ca_file", t.ClientCAFile); err != nil {
			return err
		}
	}
	return nil
}

// checkPair insists on both files (or neither) and reads them.
func checkPair(prefix, certFile, keyFile string) *Error {
	switch {
	case certFile == "" && keyFile == "":
		return nil
	case keyFile == "":
		return errorf(prefix+".key_file", "required with "+prefix+".cert_file")
	case certFile == "":
		return errorf(prefix+".cert_file", "required with "+prefix+".key_file")
	}
	_, err := loadKeyPair(prefix+".cert_file", certFile, prefix+".key_file", keyFile)
	return err
}

func (c *Config) checkServerTLS() *Error { return checkListenerTLS("server.tls", c.Server.TLS) }

func (c *Config) checkAdminTLS() *Error {
	if c.Admin.Port == 0 {
		return nil
	}
	return checkListenerTLS("admin.tls", c.Admin.TLS)
}

// checkUpstreamTLS checks upstream_tls whether or not a backend is https
// (the admin API may add one later). Without ca_file the system's pool
// is trusted.
func (c *Config) checkUpstreamTLS() *Error {
	u := c.UpstreamTLS
	if u.CAFile != "" {
		if _, err := loadCAPool("upstream_tls.ca_file", u.CAFile); err != nil {
			return err
		}
	}
	return checkPair("upstream_tls", u.CertFile, u.KeyFile)
}
