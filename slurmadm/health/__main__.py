from .hook import main

main()
