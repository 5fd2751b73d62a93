//! VirtIO-net driver (legacy, modern, vhost-user) and vhost-user backend
