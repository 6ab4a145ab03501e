#!/bin/sh
echo ho
