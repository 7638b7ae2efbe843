"""tg.launch: home of `tglaunch`, the torchrun-style launcher (see the launcher issue)."""
