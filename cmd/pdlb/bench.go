package main

import "errors"

func benchCmd(args []string) error {
	return &exitError{2, errors.New("bench: not built yet")}
}
