"""(capability package; see DESIGN.md)"""
